! pompy Fortran oracle: implicit vertical diffusion of tracers and momentum.

subroutine proft(im, jm, kb, dti2, umol, ntp, z, dz, dzz, h, etf, swrad, kh, &
                 a, c, ee, gg, f, wfsurf, fsurf, nbc, dh)
  ! pom2k proft: implicit vertical diffusion of a tracer with surface
  ! condition nbc (1: flux, 2: flux + shortwave, 3: value, 4: value +
  ! shortwave) and adiabatic bottom. Called as
  ! proft(uf,wtsurf,tsurf,nbct,tps) and proft(vf,wssurf,ssurf,nbcs,tps).
  implicit none
  integer, intent(in) :: im, jm, kb, ntp, nbc
  real(8), intent(in) :: dti2, umol, z(kb), dz(kb), dzz(kb)
  real(8), intent(in) :: h(im,jm), etf(im,jm), swrad(im,jm), kh(im,jm,kb)
  real(8), intent(in) :: wfsurf(im,jm), fsurf(im,jm)
  real(8), intent(inout) :: a(im,jm,kb), c(im,jm,kb), ee(im,jm,kb), gg(im,jm,kb)
  real(8), intent(inout) :: f(im,jm,kb), dh(im,jm)
  real(8) :: rad(im,jm,kb), r(5), ad1(5), ad2(5)
  integer :: i, j, k, ki, kbm1, kbm2
  ! irradiance after Paulson and Simpson; Jerlov types i, ia, ib, ii, iii
  data r   / .58d0, .62d0, .67d0, .77d0, .78d0 /
  data ad1 / .35d0, .60d0, 1.0d0, 1.5d0, 1.4d0 /
  data ad2 / 23.d0, 20.d0, 17.d0, 14.d0, 7.9d0 /

  kbm1 = kb - 1
  kbm2 = kb - 2
  do j = 1, jm
    do i = 1, im
      dh(i,j) = h(i,j) + etf(i,j)
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        a(i,j,k-1) = -dti2*(kh(i,j,k) + umol)/(dz(k-1)*dzz(k-1)*dh(i,j)*dh(i,j))
        c(i,j,k) = -dti2*(kh(i,j,k) + umol)/(dz(k)*dzz(k-1)*dh(i,j)*dh(i,j))
      end do
    end do
  end do
  ! penetrative radiation; what reaches the bottom is deposited there
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        rad(i,j,k) = 0.d0
      end do
    end do
  end do
  if (nbc == 2 .or. nbc == 4) then
    do k = 1, kbm1
      do j = 1, jm
        do i = 1, im
          rad(i,j,k) = swrad(i,j)*(r(ntp)*exp(z(k)*dh(i,j)/ad1(ntp)) &
                                   + (1.d0 - r(ntp))*exp(z(k)*dh(i,j)/ad2(ntp)))
        end do
      end do
    end do
  end if
  if (nbc == 1) then
    do j = 1, jm
      do i = 1, im
        ee(i,j,1) = a(i,j,1)/(a(i,j,1) - 1.d0)
        gg(i,j,1) = -dti2*wfsurf(i,j)/(-dz(1)*dh(i,j)) - f(i,j,1)
        gg(i,j,1) = gg(i,j,1)/(a(i,j,1) - 1.d0)
      end do
    end do
  else if (nbc == 2) then
    do j = 1, jm
      do i = 1, im
        ee(i,j,1) = a(i,j,1)/(a(i,j,1) - 1.d0)
        gg(i,j,1) = dti2*(wfsurf(i,j) + rad(i,j,1) - rad(i,j,2))/(dz(1)*dh(i,j)) - f(i,j,1)
        gg(i,j,1) = gg(i,j,1)/(a(i,j,1) - 1.d0)
      end do
    end do
  else if (nbc == 3 .or. nbc == 4) then
    do j = 1, jm
      do i = 1, im
        ee(i,j,1) = 0.d0
        gg(i,j,1) = fsurf(i,j)
      end do
    end do
  end if
  do k = 2, kbm2
    do j = 1, jm
      do i = 1, im
        gg(i,j,k) = 1.d0/(a(i,j,k) + c(i,j,k)*(1.d0 - ee(i,j,k-1)) - 1.d0)
        ee(i,j,k) = a(i,j,k)*gg(i,j,k)
        gg(i,j,k) = (c(i,j,k)*gg(i,j,k-1) - f(i,j,k) &
                     + dti2*(rad(i,j,k) - rad(i,j,k+1))/(dh(i,j)*dz(k)))*gg(i,j,k)
      end do
    end do
  end do
  ! bottom adiabatic boundary condition
  do j = 1, jm
    do i = 1, im
      f(i,j,kbm1) = (c(i,j,kbm1)*gg(i,j,kbm2) - f(i,j,kbm1) &
                     + dti2*(rad(i,j,kbm1) - rad(i,j,kb))/(dh(i,j)*dz(kbm1))) &
                    /(c(i,j,kbm1)*(1.d0 - ee(i,j,kbm2)) - 1.d0)
    end do
  end do
  do k = 2, kbm1
    ki = kb - k
    do j = 1, jm
      do i = 1, im
        f(i,j,ki) = (ee(i,j,ki)*f(i,j,ki+1) + gg(i,j,ki))
      end do
    end do
  end do
end subroutine proft


subroutine profu(im, jm, kb, dti2, umol, dz, dzz, h, etf, km, cbc, dum, wusurf, ub, vb, &
                 a, c, ee, gg, tps, uf, wubot)
  ! pom2k profu: implicit vertical diffusion of u with surface stress
  ! wusurf and quadratic bottom drag; sets wubot.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, umol, dz(kb), dzz(kb)
  real(8), intent(in) :: h(im,jm), etf(im,jm), km(im,jm,kb), cbc(im,jm), dum(im,jm)
  real(8), intent(in) :: wusurf(im,jm), ub(im,jm,kb), vb(im,jm,kb)
  real(8), intent(inout) :: a(im,jm,kb), c(im,jm,kb), ee(im,jm,kb), gg(im,jm,kb)
  real(8), intent(inout) :: tps(im,jm), uf(im,jm,kb), wubot(im,jm)
  real(8) :: dh(im,jm)
  integer :: i, j, k, ki, imm1, jmm1, kbm1, kbm2

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  kbm2 = kb - 2
  do j = 1, jm
    do i = 1, im
      dh(i,j) = 1.d0
    end do
  end do
  do j = 2, jm
    do i = 2, im
      dh(i,j) = (h(i,j) + etf(i,j) + h(i-1,j) + etf(i-1,j))*.5d0
    end do
  end do
  do k = 1, kb
    do j = 2, jm
      do i = 2, im
        c(i,j,k) = (km(i,j,k) + km(i-1,j,k))*.5d0
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        a(i,j,k-1) = -dti2*(c(i,j,k) + umol)/(dz(k-1)*dzz(k-1)*dh(i,j)*dh(i,j))
        c(i,j,k) = -dti2*(c(i,j,k) + umol)/(dz(k)*dzz(k-1)*dh(i,j)*dh(i,j))
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      ee(i,j,1) = a(i,j,1)/(a(i,j,1) - 1.d0)
      gg(i,j,1) = (-dti2*wusurf(i,j)/(-dz(1)*dh(i,j)) - uf(i,j,1))/(a(i,j,1) - 1.d0)
    end do
  end do
  do k = 2, kbm2
    do j = 1, jm
      do i = 1, im
        gg(i,j,k) = 1.d0/(a(i,j,k) + c(i,j,k)*(1.d0 - ee(i,j,k-1)) - 1.d0)
        ee(i,j,k) = a(i,j,k)*gg(i,j,k)
        gg(i,j,k) = (c(i,j,k)*gg(i,j,k-1) - uf(i,j,k))*gg(i,j,k)
      end do
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      tps(i,j) = 0.5d0*(cbc(i,j) + cbc(i-1,j)) &
                 *sqrt(ub(i,j,kbm1)**2 + (.25d0*(vb(i,j,kbm1) + vb(i,j+1,kbm1) &
                                                 + vb(i-1,j,kbm1) + vb(i-1,j+1,kbm1)))**2)
      uf(i,j,kbm1) = (c(i,j,kbm1)*gg(i,j,kbm2) - uf(i,j,kbm1)) &
                     /(tps(i,j)*dti2/(-dz(kbm1)*dh(i,j)) - 1.d0 &
                       - (ee(i,j,kbm2) - 1.d0)*c(i,j,kbm1))
      uf(i,j,kbm1) = uf(i,j,kbm1)*dum(i,j)
    end do
  end do
  do k = 2, kbm1
    ki = kb - k
    do j = 2, jmm1
      do i = 2, imm1
        uf(i,j,ki) = (ee(i,j,ki)*uf(i,j,ki+1) + gg(i,j,ki))*dum(i,j)
      end do
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      wubot(i,j) = -tps(i,j)*uf(i,j,kbm1)
    end do
  end do
end subroutine profu


subroutine profv(im, jm, kb, dti2, umol, dz, dzz, h, etf, km, cbc, dvm, wvsurf, ub, vb, &
                 a, c, ee, gg, tps, vf, wvbot)
  ! pom2k profv: as profu for v; sets wvbot.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, umol, dz(kb), dzz(kb)
  real(8), intent(in) :: h(im,jm), etf(im,jm), km(im,jm,kb), cbc(im,jm), dvm(im,jm)
  real(8), intent(in) :: wvsurf(im,jm), ub(im,jm,kb), vb(im,jm,kb)
  real(8), intent(inout) :: a(im,jm,kb), c(im,jm,kb), ee(im,jm,kb), gg(im,jm,kb)
  real(8), intent(inout) :: tps(im,jm), vf(im,jm,kb), wvbot(im,jm)
  real(8) :: dh(im,jm)
  integer :: i, j, k, ki, imm1, jmm1, kbm1, kbm2

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  kbm2 = kb - 2
  do j = 1, jm
    do i = 1, im
      dh(i,j) = 1.d0
    end do
  end do
  do j = 2, jm
    do i = 2, im
      dh(i,j) = (h(i,j) + etf(i,j) + h(i,j-1) + etf(i,j-1))*.5d0
    end do
  end do
  do k = 1, kb
    do j = 2, jm
      do i = 2, im
        c(i,j,k) = (km(i,j,k) + km(i,j-1,k))*.5d0
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        a(i,j,k-1) = -dti2*(c(i,j,k) + umol)/(dz(k-1)*dzz(k-1)*dh(i,j)*dh(i,j))
        c(i,j,k) = -dti2*(c(i,j,k) + umol)/(dz(k)*dzz(k-1)*dh(i,j)*dh(i,j))
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      ee(i,j,1) = a(i,j,1)/(a(i,j,1) - 1.d0)
      gg(i,j,1) = (-dti2*wvsurf(i,j)/(-dz(1)*dh(i,j)) - vf(i,j,1))/(a(i,j,1) - 1.d0)
    end do
  end do
  do k = 2, kbm2
    do j = 1, jm
      do i = 1, im
        gg(i,j,k) = 1.d0/(a(i,j,k) + c(i,j,k)*(1.d0 - ee(i,j,k-1)) - 1.d0)
        ee(i,j,k) = a(i,j,k)*gg(i,j,k)
        gg(i,j,k) = (c(i,j,k)*gg(i,j,k-1) - vf(i,j,k))*gg(i,j,k)
      end do
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      tps(i,j) = 0.5d0*(cbc(i,j) + cbc(i,j-1)) &
                 *sqrt((.25d0*(ub(i,j,kbm1) + ub(i+1,j,kbm1) &
                               + ub(i,j-1,kbm1) + ub(i+1,j-1,kbm1)))**2 + vb(i,j,kbm1)**2)
      vf(i,j,kbm1) = (c(i,j,kbm1)*gg(i,j,kbm2) - vf(i,j,kbm1)) &
                     /(tps(i,j)*dti2/(-dz(kbm1)*dh(i,j)) - 1.d0 &
                       - (ee(i,j,kbm2) - 1.d0)*c(i,j,kbm1))
      vf(i,j,kbm1) = vf(i,j,kbm1)*dvm(i,j)
    end do
  end do
  do k = 2, kbm1
    ki = kb - k
    do j = 2, jmm1
      do i = 2, imm1
        vf(i,j,ki) = (ee(i,j,ki)*vf(i,j,ki+1) + gg(i,j,ki))*dvm(i,j)
      end do
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      wvbot(i,j) = -tps(i,j)*vf(i,j,kbm1)
    end do
  end do
end subroutine profv
