! pompy Fortran oracle: open and closed lateral boundary conditions.

subroutine bcond(idx, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
                 zz, h, dx, dy, dt, fsm, dum, dvm, el, u, v, t, s, q2, q2l, &
                 ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                 tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                 elf, uaf, vaf, uf, vf, w)
  ! pom2k bcond(idx):
  !   1 external elevation elf (zero gradient, masked)
  !   2 external velocity uaf, vaf (radiation east/west/north/south)
  !   3 internal velocity uf, vf (Orlanski-like east/west)
  !   4 temperature (uf) and salinity (vf): upstream inflow/outflow
  !   5 vertical velocity w (masked)
  !   6 q2 (uf) and q2l (vf): upstream with small inflow values
  implicit none
  integer, intent(in) :: idx, im, jm, kb
  real(8), intent(in) :: grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs
  real(8), intent(in) :: zz(kb), h(im,jm), dx(im,jm), dy(im,jm), dt(im,jm)
  real(8), intent(in) :: fsm(im,jm), dum(im,jm), dvm(im,jm), el(im,jm)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), t(im,jm,kb), s(im,jm,kb)
  real(8), intent(in) :: q2(im,jm,kb), q2l(im,jm,kb)
  real(8), intent(in) :: ele(jm), elw(jm), eln(im), els(im)
  real(8), intent(in) :: uabe(jm), uabw(jm), vabn(im), vabs(im)
  real(8), intent(in) :: tbe(jm,kb), tbw(jm,kb), tbn(im,kb), tbs(im,kb)
  real(8), intent(in) :: sbe(jm,kb), sbw(jm,kb), sbn(im,kb), sbs(im,kb)
  real(8), intent(inout) :: elf(im,jm), uaf(im,jm), vaf(im,jm)
  real(8), intent(inout) :: uf(im,jm,kb), vf(im,jm,kb), w(im,jm,kb)
  real(8) :: ga, u1, wm
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1

  if (idx == 1) then
    do j = 1, jm
      elf(1,j) = elf(2,j)
      elf(im,j) = elf(imm1,j)
    end do
    do i = 1, im
      elf(i,1) = elf(i,2)
      elf(i,jm) = elf(i,jmm1)
    end do
    do j = 1, jm
      do i = 1, im
        elf(i,j) = elf(i,j)*fsm(i,j)
      end do
    end do

  else if (idx == 2) then
    do j = 2, jmm1
      ! east
      uaf(im,j) = uabe(j) + rfe*sqrt(grav/h(imm1,j))*(el(imm1,j) - ele(j))
      uaf(im,j) = ramp*uaf(im,j)
      vaf(im,j) = 0.d0
      ! west
      uaf(2,j) = uabw(j) - rfw*sqrt(grav/h(2,j))*(el(2,j) - elw(j))
      uaf(2,j) = ramp*uaf(2,j)
      uaf(1,j) = uaf(2,j)
      vaf(1,j) = 0.d0
    end do
    do i = 2, imm1
      ! north
      vaf(i,jm) = vabn(i) + rfn*sqrt(grav/h(i,jmm1))*(el(i,jmm1) - eln(i))
      vaf(i,jm) = ramp*vaf(i,jm)
      uaf(i,jm) = 0.d0
      ! south
      vaf(i,2) = vabs(i) - rfs*sqrt(grav/h(i,2))*(el(i,2) - els(i))
      vaf(i,2) = ramp*vaf(i,2)
      vaf(i,1) = vaf(i,2)
      uaf(i,1) = 0.d0
    end do
    do j = 1, jm
      do i = 1, im
        uaf(i,j) = uaf(i,j)*dum(i,j)
        vaf(i,j) = vaf(i,j)*dvm(i,j)
      end do
    end do

  else if (idx == 3) then
    do k = 1, kbm1
      do j = 2, jmm1
        ! east
        ga = sqrt(h(im,j)/hmax)
        uf(im,j,k) = ga*(.25d0*u(imm1,j-1,k) + .5d0*u(imm1,j,k) + .25d0*u(imm1,j+1,k)) &
                     + (1.d0 - ga)*(.25d0*u(im,j-1,k) + .5d0*u(im,j,k) + .25d0*u(im,j+1,k))
        vf(im,j,k) = 0.d0
        ! west
        ga = sqrt(h(1,j)/hmax)
        uf(2,j,k) = ga*(.25d0*u(3,j-1,k) + .5d0*u(3,j,k) + .25d0*u(3,j+1,k)) &
                    + (1.d0 - ga)*(.25d0*u(2,j-1,k) + .5d0*u(2,j,k) + .25d0*u(2,j+1,k))
        uf(1,j,k) = uf(2,j,k)
        vf(1,j,k) = 0.d0
      end do
    end do
    do k = 1, kbm1
      do j = 1, jm
        do i = 1, im
          uf(i,j,k) = uf(i,j,k)*dum(i,j)
          vf(i,j,k) = vf(i,j,k)*dvm(i,j)
        end do
      end do
    end do

  else if (idx == 4) then
    do k = 1, kbm1
      do j = 1, jm
        ! east
        u1 = 2.d0*u(im,j,k)*dti/(dx(im,j) + dx(imm1,j))
        if (u1 <= 0.d0) then
          uf(im,j,k) = t(im,j,k) - u1*(tbe(j,k) - t(im,j,k))
          vf(im,j,k) = s(im,j,k) - u1*(sbe(j,k) - s(im,j,k))
        else
          uf(im,j,k) = t(im,j,k) - u1*(t(im,j,k) - t(imm1,j,k))
          vf(im,j,k) = s(im,j,k) - u1*(s(im,j,k) - s(imm1,j,k))
          if (k /= 1 .and. k /= kbm1) then
            wm = .5d0*(w(imm1,j,k) + w(imm1,j,k+1))*dti/((zz(k-1) - zz(k+1))*dt(imm1,j))
            uf(im,j,k) = uf(im,j,k) - wm*(t(imm1,j,k-1) - t(imm1,j,k+1))
            vf(im,j,k) = vf(im,j,k) - wm*(s(imm1,j,k-1) - s(imm1,j,k+1))
          end if
        end if
        ! west
        u1 = 2.d0*u(2,j,k)*dti/(dx(1,j) + dx(2,j))
        if (u1 >= 0.d0) then
          uf(1,j,k) = t(1,j,k) - u1*(t(1,j,k) - tbw(j,k))
          vf(1,j,k) = s(1,j,k) - u1*(s(1,j,k) - sbw(j,k))
        else
          uf(1,j,k) = t(1,j,k) - u1*(t(2,j,k) - t(1,j,k))
          vf(1,j,k) = s(1,j,k) - u1*(s(2,j,k) - s(1,j,k))
          if (k /= 1 .and. k /= kbm1) then
            wm = .5d0*(w(2,j,k) + w(2,j,k+1))*dti/((zz(k-1) - zz(k+1))*dt(2,j))
            uf(1,j,k) = uf(1,j,k) - wm*(t(2,j,k-1) - t(2,j,k+1))
            vf(1,j,k) = vf(1,j,k) - wm*(s(2,j,k-1) - s(2,j,k+1))
          end if
        end if
      end do
    end do
    do k = 1, kbm1
      do i = 1, im
        ! north
        u1 = 2.d0*v(i,jm,k)*dti/(dy(i,jm) + dy(i,jmm1))
        if (u1 <= 0.d0) then
          uf(i,jm,k) = t(i,jm,k) - u1*(tbn(i,k) - t(i,jm,k))
          vf(i,jm,k) = s(i,jm,k) - u1*(sbn(i,k) - s(i,jm,k))
        else
          uf(i,jm,k) = t(i,jm,k) - u1*(t(i,jm,k) - t(i,jmm1,k))
          vf(i,jm,k) = s(i,jm,k) - u1*(s(i,jm,k) - s(i,jmm1,k))
          if (k /= 1 .and. k /= kbm1) then
            wm = .5d0*(w(i,jmm1,k) + w(i,jmm1,k+1))*dti/((zz(k-1) - zz(k+1))*dt(i,jmm1))
            uf(i,jm,k) = uf(i,jm,k) - wm*(t(i,jmm1,k-1) - t(i,jmm1,k+1))
            vf(i,jm,k) = vf(i,jm,k) - wm*(s(i,jmm1,k-1) - s(i,jmm1,k+1))
          end if
        end if
        ! south
        u1 = 2.d0*v(i,2,k)*dti/(dy(i,1) + dy(i,2))
        if (u1 >= 0.d0) then
          uf(i,1,k) = t(i,1,k) - u1*(t(i,1,k) - tbs(i,k))
          vf(i,1,k) = s(i,1,k) - u1*(s(i,1,k) - sbs(i,k))
        else
          uf(i,1,k) = t(i,1,k) - u1*(t(i,2,k) - t(i,1,k))
          vf(i,1,k) = s(i,1,k) - u1*(s(i,2,k) - s(i,1,k))
          if (k /= 1 .and. k /= kbm1) then
            wm = .5d0*(w(i,2,k) + w(i,2,k+1))*dti/((zz(k-1) - zz(k+1))*dt(i,2))
            uf(i,1,k) = uf(i,1,k) - wm*(t(i,2,k-1) - t(i,2,k+1))
            vf(i,1,k) = vf(i,1,k) - wm*(s(i,2,k-1) - s(i,2,k+1))
          end if
        end if
      end do
    end do
    do k = 1, kbm1
      do j = 1, jm
        do i = 1, im
          uf(i,j,k) = uf(i,j,k)*fsm(i,j)
          vf(i,j,k) = vf(i,j,k)*fsm(i,j)
        end do
      end do
    end do

  else if (idx == 5) then
    do k = 1, kbm1
      do j = 1, jm
        do i = 1, im
          w(i,j,k) = w(i,j,k)*fsm(i,j)
        end do
      end do
    end do

  else if (idx == 6) then
    do k = 1, kb
      do j = 1, jm
        ! east
        u1 = 2.d0*u(im,j,k)*dti/(dx(im,j) + dx(imm1,j))
        if (u1 <= 0.d0) then
          uf(im,j,k) = q2(im,j,k) - u1*(small - q2(im,j,k))
          vf(im,j,k) = q2l(im,j,k) - u1*(small - q2l(im,j,k))
        else
          uf(im,j,k) = q2(im,j,k) - u1*(q2(im,j,k) - q2(imm1,j,k))
          vf(im,j,k) = q2l(im,j,k) - u1*(q2l(im,j,k) - q2l(imm1,j,k))
        end if
        ! west
        u1 = 2.d0*u(2,j,k)*dti/(dx(1,j) + dx(2,j))
        if (u1 >= 0.d0) then
          uf(1,j,k) = q2(1,j,k) - u1*(q2(1,j,k) - small)
          vf(1,j,k) = q2l(1,j,k) - u1*(q2l(1,j,k) - small)
        else
          uf(1,j,k) = q2(1,j,k) - u1*(q2(2,j,k) - q2(1,j,k))
          vf(1,j,k) = q2l(1,j,k) - u1*(q2l(2,j,k) - q2l(1,j,k))
        end if
      end do
    end do
    do k = 1, kb
      do i = 1, im
        ! north
        u1 = 2.d0*v(i,jm,k)*dti/(dy(i,jm) + dy(i,jmm1))
        if (u1 <= 0.d0) then
          uf(i,jm,k) = q2(i,jm,k) - u1*(small - q2(i,jm,k))
          vf(i,jm,k) = q2l(i,jm,k) - u1*(small - q2l(i,jm,k))
        else
          uf(i,jm,k) = q2(i,jm,k) - u1*(q2(i,jm,k) - q2(i,jmm1,k))
          vf(i,jm,k) = q2l(i,jm,k) - u1*(q2l(i,jm,k) - q2l(i,jmm1,k))
        end if
        ! south
        u1 = 2.d0*v(i,2,k)*dti/(dy(i,1) + dy(i,2))
        if (u1 >= 0.d0) then
          uf(i,1,k) = q2(i,1,k) - u1*(q2(i,1,k) - small)
          vf(i,1,k) = q2l(i,1,k) - u1*(q2l(i,1,k) - small)
        else
          uf(i,1,k) = q2(i,1,k) - u1*(q2(i,2,k) - q2(i,1,k))
          vf(i,1,k) = q2l(i,1,k) - u1*(q2l(i,2,k) - q2l(i,1,k))
        end if
      end do
    end do
    do k = 1, kb
      do j = 1, jm
        do i = 1, im
          uf(i,j,k) = uf(i,j,k)*fsm(i,j) + 1.d-10
          vf(i,j,k) = vf(i,j,k)*fsm(i,j) + 1.d-10
        end do
      end do
    end do
  end if
end subroutine bcond
