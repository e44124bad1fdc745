! pompy Fortran oracle: vertical grid, areas and masks, slope limiter.
! Subroutine for subroutine as pom2k (2006-05-03); arguments explicit.

subroutine depth(kb, kl1, kl2, z, zz, dz, dzz)
  ! pom2k depth: sigma levels with log spacing kl1 near the surface and
  ! kl2 near the bottom.
  implicit none
  integer, intent(in) :: kb, kl1, kl2
  real(8), intent(inout) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8) :: delz
  integer :: kdz(12), k
  data kdz /1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024/

  z(1) = 0.d0
  do k = 2, kl1
    z(k) = z(k-1) + kdz(k-1)
  end do
  delz = z(kl1) - z(kl1-1)
  do k = kl1+1, kl2
    z(k) = z(k-1) + delz
  end do
  do k = kl2+1, kb
    dz(k) = dble(kdz(kb-k+1))*delz/dble(kdz(kb-kl2))
    z(k) = z(k-1) + dz(k)
  end do
  do k = 1, kb
    z(k) = -z(k)/z(kb)
  end do
  do k = 1, kb-1
    zz(k) = 0.5d0*(z(k) + z(k+1))
  end do
  zz(kb) = 2.d0*zz(kb-1) - zz(kb-2)
  do k = 1, kb-1
    dz(k) = z(k) - z(k+1)
    dzz(k) = zz(k) - zz(k+1)
  end do
  dz(kb) = 0.d0
  dzz(kb) = 0.d0
end subroutine depth


subroutine areas_masks(im, jm, dx, dy, h, art, aru, arv, fsm, dum, dvm)
  ! pom2k areas_masks: cell areas at t, u, v points and the land masks.
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in) :: dx(im,jm), dy(im,jm), h(im,jm)
  real(8), intent(inout) :: art(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(inout) :: fsm(im,jm), dum(im,jm), dvm(im,jm)
  integer :: i, j

  do j = 1, jm
    do i = 1, im
      art(i,j) = dx(i,j)*dy(i,j)
    end do
  end do
  do j = 2, jm
    do i = 2, im
      aru(i,j) = .25d0*(dx(i,j) + dx(i-1,j))*(dy(i,j) + dy(i-1,j))
      arv(i,j) = .25d0*(dx(i,j) + dx(i,j-1))*(dy(i,j) + dy(i,j-1))
    end do
  end do
  do j = 1, jm
    aru(1,j) = aru(2,j)
    arv(1,j) = arv(2,j)
  end do
  do i = 1, im
    aru(i,1) = aru(i,2)
    arv(i,1) = arv(i,2)
  end do
  do j = 1, jm
    do i = 1, im
      fsm(i,j) = 0.d0
      dum(i,j) = 0.d0
      dvm(i,j) = 0.d0
      if (h(i,j) > 1.d0) fsm(i,j) = 1.d0
    end do
  end do
  do j = 2, jm
    do i = 2, im
      dum(i,j) = fsm(i,j)*fsm(i-1,j)
      dvm(i,j) = fsm(i,j)*fsm(i,j-1)
    end do
  end do
end subroutine areas_masks


subroutine slpmax(im, jm, slmax, fsm, h)
  ! pom2k slpmax: limit the slope parameter |dh|/(h1+h2) to slmax by
  ! ten sweeps right, left, up and down.
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in) :: slmax, fsm(im,jm)
  real(8), intent(inout) :: h(im,jm)
  real(8) :: mean, del
  integer :: i, j, loop

  do loop = 1, 10
    do j = 2, jm-1
      do i = 2, im-1                               ! sweep right
        if (fsm(i,j) /= 0.d0 .and. fsm(i+1,j) /= 0.d0) then
          if (abs(h(i+1,j) - h(i,j))/(h(i,j) + h(i+1,j)) >= slmax) then
            mean = (h(i+1,j) + h(i,j))/2.d0
            del = sign(slmax, h(i+1,j) - h(i,j))
            h(i+1,j) = mean*(1.d0 + del)
            h(i,j) = mean*(1.d0 - del)
          end if
        end if
      end do
      do i = im-1, 2, -1                           ! sweep left
        if (fsm(i,j) /= 0.d0 .and. fsm(i+1,j) /= 0.d0) then
          if (abs(h(i+1,j) - h(i,j))/(h(i,j) + h(i+1,j)) >= slmax) then
            mean = (h(i+1,j) + h(i,j))/2.d0
            del = sign(slmax, h(i+1,j) - h(i,j))
            h(i+1,j) = mean*(1.d0 + del)
            h(i,j) = mean*(1.d0 - del)
          end if
        end if
      end do
    end do
    do i = 2, im-1
      do j = 2, jm-1                               ! sweep up
        if (fsm(i,j) /= 0.d0 .and. fsm(i,j+1) /= 0.d0) then
          if (abs(h(i,j+1) - h(i,j))/(h(i,j) + h(i,j+1)) >= slmax) then
            mean = (h(i,j+1) + h(i,j))/2.d0
            del = sign(slmax, h(i,j+1) - h(i,j))
            h(i,j+1) = mean*(1.d0 + del)
            h(i,j) = mean*(1.d0 - del)
          end if
        end if
      end do
      do j = jm-1, 2, -1                           ! sweep down
        if (fsm(i,j) /= 0.d0 .and. fsm(i,j+1) /= 0.d0) then
          if (abs(h(i,j+1) - h(i,j))/(h(i,j) + h(i,j+1)) >= slmax) then
            mean = (h(i,j+1) + h(i,j))/2.d0
            del = sign(slmax, h(i,j+1) - h(i,j))
            h(i,j+1) = mean*(1.d0 + del)
            h(i,j) = mean*(1.d0 - del)
          end if
        end if
      end do
    end do
  end do
end subroutine slpmax
